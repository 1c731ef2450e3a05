-- Add jobs, in groups: each group is jobs of one actor in one queue, and one call can add
-- the groups of several queues (an event's channel jobs: one round trip for all of them).
-- ARGV: now_ms, number of groups, call id (unique to this call, the same when the call is
--   sent again), then per group: base, n, actor, cfg (see parse_cfg),
--   max started (0 = unbounded), then per job 8 fields:
--   id, data, priority, run_at_ms, dedup_id ("" = none), again (flags: "f" retry a
--   retained failed job in place, "c" replay a completed job in place; "" = neither),
--   message id ("" = none: the Redis broker's jobs have no message of their own),
--   group key ("" = none; a job retried or replayed in place keeps its own)
-- Returns per job, groups in order: {status, job id} with status
--   added|duplicated|deduplicated|retried|replayed. The same call sent again after its
--   reply was lost (a client retry on a timeout) carries the same call id, now_ms and
--   message id: the call leaves a marker (<first base>call:<call id>, 60 s), so a job it
--   added, retried or replayed (stamped ts, rt or rp = now_ms, msg = its message id)
--   reports the same status again, and the caller still publishes the job's message.
--   Without the marker an existing job is a duplicate, even one added by another call
--   in the same millisecond.
--   On RabbitMQ (a message id given) a duplicate that is waiting or delayed may have no
--   message at all (its producer failed to publish it): the job's current message becomes
--   the one given, and the row is {"duplicated", job id, actor, data, priority, run_at ms
--   or 0} so the caller publishes it, with the job's own payload and remaining delay. An
--   older message of the job, if it went out after all, is dropped on arrival. A job
--   retried or replayed in place answers the same long row (with its status): it runs
--   its own payload, as on the Redis broker, not the add's.
local now, groups, call = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
local o = 3
-- one command marks this call and says whether it was marked before (SET … GET: 6.2+)
local sent_again = redis.call("SET", ARGV[4] .. "call:" .. call, 1, "PX", 60000, "GET") ~= false
local results = {}

-- The row of an existing job that now awaits the message the add names (RabbitMQ): the
-- job's own actor, payload, priority and run_at ms (0: now), for the caller to publish.
local function message_row(status, id, jk)
  local rec = redis.call("HMGET", jk, "actor", "data", "prio", "run_at")
  return {status, id, rec[1], rec[2], tonumber(rec[3] or "5"), tonumber(rec[4] or "") or 0}
end

local function add_group()
  local base, n, actor, cfg, max_started = ARGV[o + 1], tonumber(ARGV[o + 2]), ARGV[o + 3],
    ARGV[o + 4], ARGV[o + 5]
  o = o + 5
  local waiting = {}
  local counts = {added = 0, duplicated = 0, deduplicated = 0, retried = 0, replayed = 0}
  -- reserve n sequence numbers at once: FIFO order within a priority
  local seq = redis.call("HINCRBY", base .. "meta", "seq", n) - n
  for _ = 1, n do
    local id, data, prio, run_at = ARGV[o + 1], ARGV[o + 2], ARGV[o + 3], tonumber(ARGV[o + 4])
    local dd, again, token, grp = ARGV[o + 5], ARGV[o + 6], ARGV[o + 7], ARGV[o + 8]
    o = o + 8
    local jk = base .. "job:" .. id
    local job = redis.call("HMGET", jk, "state", "ts", "rt", "rp")
    local state = job[1]
    local status
    if state then
      status = "duplicated"
      local row = {status, id}
      local resent = (job[2] == ARGV[1] and "added") or (job[3] == ARGV[1] and "retried")
        or (job[4] == ARGV[1] and "replayed")
      if resent and sent_again and (token == "" or redis.call("HGET", jk, "msg") == token) then
        -- this very call, sent again
        status = resent
        row = (token ~= "" and resent ~= "added") and message_row(status, id, jk)
          or {status, id}
      elseif (state == "failed" and has_option(again, "f"))
          or (state == "completed" and has_option(again, "c")) then
        -- in place, under the same id: both attempt counters reset, the last outcome
        -- cleared; rn is kept, so no earlier run's token can end the new run
        status = state == "failed" and "retried" or "replayed"
        redis.call("ZREM", base .. state, id)
        redis.call("HSET", jk, "am", 0, "as", 0, "msg", token,
          status == "retried" and "rt" or "rp", now)
        redis.call("HDEL", jk, "ft", "fr", "st", "rv")
        if dd ~= "" and redis.call("SET", base .. "dedup:" .. dd, id, "NX") then
          redis.call("HSET", jk, "dd", dd)
        end
        enqueue_job(base, jk, id, now, run_at)
        row = token ~= "" and message_row(status, id, jk) or {status, id}
      elseif token ~= "" and (state == "waiting" or state == "delayed") then
        redis.call("HSET", jk, "msg", token)
        row = message_row(status, id, jk)
      end
      results[#results + 1] = row
    else
      local holder = false
      if dd ~= "" then
        holder = redis.call("GET", base .. "dedup:" .. dd)
        if not holder then redis.call("SET", base .. "dedup:" .. dd, id) end
      end
      if holder then
        status = "deduplicated"
        results[#results + 1] = {status, holder}
      else
        status = "added"
        local delayed = run_at > now
        local fields = {"actor", actor, "data", data, "prio", prio, "ts", now, "cfg", cfg,
          "state", delayed and "delayed" or "waiting"}
        -- optional fields only when set: fewer arguments on the common path
        if max_started ~= "0" then fields[13] = "msa"; fields[14] = max_started end
        if dd ~= "" then fields[#fields + 1] = "dd"; fields[#fields + 1] = dd end
        if token ~= "" then fields[#fields + 1] = "msg"; fields[#fields + 1] = token end
        if grp ~= "" then fields[#fields + 1] = "grp"; fields[#fields + 1] = grp end
        if delayed then fields[#fields + 1] = "run_at"; fields[#fields + 1] = run_at end
        redis.call("HSET", jk, unpack(fields))
        if delayed then
          redis.call("ZADD", base .. "delayed", run_at, id)
        else
          seq = seq + 1
          waiting[#waiting + 1] = tonumber(prio) * PRIORITY_SHIFT + seq
          waiting[#waiting + 1] = id
        end
        results[#results + 1] = {status, id}
      end
    end
    counts[status] = counts[status] + 1
  end
  for i = 1, #waiting, 1000 do
    redis.call("ZADD", base .. "wait", unpack(waiting, i, math.min(i + 999, #waiting)))
  end
  for _, metric in ipairs({"duplicated", "deduplicated"}) do
    if counts[metric] > 0 then redis.call("HINCRBY", base .. "metrics", metric, counts[metric]) end
  end
  local woken = counts.added + counts.retried + counts.replayed
  if woken > 0 then wake(base, woken) end
end

for _ = 1, groups do add_group() end
return results
