"""The ``herald`` subcommands, one module per kind; :mod:`herald.cli` parses the
arguments and calls them.

- :mod:`~herald.commands.demo`: ``herald demo``
- :mod:`~herald.commands.up`: ``herald up`` (its supervisor is :mod:`herald.supervisor`)
- :mod:`~herald.commands.processes`: the Procfile's processes, ``web``, ``worker``,
  ``clock`` and ``migrate``
- :mod:`~herald.commands.tools`: the operator tools, ``queues``, ``sweep``, ``clean``
  and ``retry``
- :mod:`~herald.commands.shared`: what they share (output, errors, the actor modules)

Each command is a function ``cmd_<name>(args, settings) -> exit code``.
"""
