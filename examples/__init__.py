"""Applications built on herald's libraries, run by the tests as their users would."""
