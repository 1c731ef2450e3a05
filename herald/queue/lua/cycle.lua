-- One consumer round trip: finish jobs, extend locks, then (Redis broker) promote due
-- delayed jobs, restart stalled ones and start up to `count` new ones.
-- ARGV: base, now, count, external ("1": the messages live in another broker; only
--   finish), n_done, n_finish, n_extend, lock_ms, rate_max (0 = none), rate_window_ms,
--   stall_check_ms, completed keep count, completed keep age ms, failed keep count,
--   failed keep age ms (-1 = no limit), then the queue's group limits (see
--   read_group_limits),
--   then per done job 2 fields: id, token (completed with no return value: the common
--     case, reported back only when stale)
--   then per finished job 6 fields: id, token, outcome, value, stack, next token (the id
--     of the message that carries the next attempt, external only)
--     c = completed (value = return value JSON), f = failed attempt (value = message),
--     p = permanent failure (value = message), d = deferred (value = delay ms),
--     u = deferred and the start given back (value = delay ms),
--     r = released unstarted (worker shutdown), x = exceeded max_started_attempts
--   then per extended lock 2 fields: id, token
-- Returns {finished, started, next_delayed_at, rate_limited_ms, drained}:
--   finished: per finished job {id, result, run_at} with result
--     completed|failed|retry|deferred|released|stale (done jobs only when stale), and per
--     job that exceeded max_started_attempts when fetched
--     {id, "exhausted", 0, actor, data, reason}
--   started: per started job {id, actor, data, token, attempts made, attempts started,
--     priority, created at} (the last four as integers)
--   drained: 1 when the fetch took fewer jobs than asked, so the wait set is empty now
--     (a job added later wakes the consumer with a marker), else 0; the queue's marker
--     list is emptied then
-- A job whose group is at its limit is not started: the fetch parks it (see common.lua)
-- and goes on to the jobs behind it, so one full group never holds up the others; a
-- parked job goes back to wait, in its place, when a job of its group leaves active.
local base, now, count = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local external = ARGV[4] == "1"
local n_done, n_finish, n_extend = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local lock_ms, rate_max, rate_window = tonumber(ARGV[8]), tonumber(ARGV[9]), tonumber(ARGV[10])
local stall_check_ms = tonumber(ARGV[11])
local keep = {completed = {tonumber(ARGV[12]), tonumber(ARGV[13])},
              failed = {tonumber(ARGV[14]), tonumber(ARGV[15])}}
local tally = {}
local limits, o = read_group_limits(15)

local function bump(metric) tally[metric] = (tally[metric] or 0) + 1 end

local function fail_for_good(jk, id, reason, stack, options, dd)
  redis.call("HSET", jk, "fr", reason, "st", stack)
  finish_job(base, jk, id, now, "failed", has_option(options, "f"), dd)
  bump("failed")
end

local function reschedule(jk, id, delay, next_token, prio)
  redis.call("ZREM", base .. "active", id)
  local run_at = now + delay
  if external then
    -- the broker holds the message until run_at; the ledger only records the state
    redis.call("ZADD", base .. "delayed", run_at, id)
    redis.call("HSET", jk, "state", "delayed", "run_at", run_at, "msg", next_token)
  else
    enqueue_job(base, jk, id, now, run_at, prio)
  end
  return run_at
end

-- A finish sent again after its reply was lost (a client retry on a timeout): when its
-- first send rescheduled the job under next_token, give the same answer again, so the
-- caller still publishes the next message; anything else is stale.
local function rescheduled_already(jk, outcome, next_token)
  local job = redis.call("HMGET", jk, "state", "msg", "run_at")
  if job[1] == "delayed" and job[2] == next_token then
    local deferred = outcome == "d" or outcome == "u"
    return (deferred and "deferred" or "retry"), tonumber(job[3])
  end
  return "stale", 0
end

local finished, unlock, completed = {}, {}, {}

-- the common case, batched: one HSET per job, one ZREM and one ZADD per call
local function complete(jk, id, cfg, dd, value)
  release_dedup(base, dd, id)
  unlock[#unlock + 1] = id
  if has_option(select(4, parse_cfg(cfg)), "c") then
    redis.call("DEL", jk)
  else
    if value ~= "null" then
      redis.call("HSET", jk, "state", "completed", "ft", now, "rv", value)
    else
      redis.call("HSET", jk, "state", "completed", "ft", now)
    end
    completed[#completed + 1] = now
    completed[#completed + 1] = id
  end
  bump("completed")
end

for _ = 1, n_done do
  local id, token = ARGV[o + 1], ARGV[o + 2]
  o = o + 2
  local jk = base .. "job:" .. id
  local job = redis.call("HMGET", jk, "state", "tok", "cfg", "dd", "grp")
  if job[1] == "active" and job[2] == token then
    complete(jk, id, job[3], job[4], "null")
    if job[5] then group_left(base, limits, job[5]) end
  else
    finished[#finished + 1] = {id, "stale", 0}
  end
end

for _ = 1, n_finish do
  local id, token, outcome = ARGV[o + 1], ARGV[o + 2], ARGV[o + 3]
  local value, stack, next_token = ARGV[o + 4], ARGV[o + 5], ARGV[o + 6]
  o = o + 6
  local jk = base .. "job:" .. id
  local job = redis.call("HMGET", jk, "state", "tok", "cfg", "dd", "am", "prio", "grp")
  local result, run_at = "stale", 0
  if job[1] == "active" and job[2] == token then
    -- every outcome below ends the job's active spell
    if job[7] then group_left(base, limits, job[7]) end
    local attempts, kind, base_ms, options = parse_cfg(job[3])
    if outcome == "c" then
      complete(jk, id, job[3], job[4], value)
      result = "completed"
    elseif outcome == "r" then
      -- handed back unstarted (worker shutdown): not a start, not a failure
      redis.call("ZREM", base .. "active", id)
      redis.call("HINCRBY", jk, "as", -1)
      enqueue_job(base, jk, id, now, 0, job[6])
      wake(base, 1)
      result = "released"
    elseif outcome == "x" then
      -- too many starts (RabbitMQ's claim found it): no attempt ran, none is counted
      fail_for_good(jk, id, value, "", options, job[4])
      result = "failed"
    elseif outcome == "d" or outcome == "u" then
      -- "u": the run found its job not due yet; its start does not count
      if outcome == "u" then redis.call("HINCRBY", jk, "as", -1) end
      run_at = reschedule(jk, id, tonumber(value), next_token, job[6])
      bump("deferred")
      result = "deferred"
    else
      local made = tonumber(job[5] or "0") + 1
      redis.call("HSET", jk, "am", made)
      if outcome == "p" or made >= attempts then
        fail_for_good(jk, id, value, stack, options, job[4])
        result = "failed"
      else
        redis.call("HSET", jk, "fr", value, "st", stack)
        local delay = backoff_ms(kind, base_ms, made + 1)
        run_at = reschedule(jk, id, delay, next_token, job[6])
        bump("retried")
        result = "retry"
      end
    end
  elseif external and next_token ~= "" then
    result, run_at = rescheduled_already(jk, outcome, next_token)
  end
  finished[#finished + 1] = {id, result, run_at}
end

if #unlock > 0 then redis.call("ZREM", base .. "active", unpack(unlock)) end
if #completed > 0 then redis.call("ZADD", base .. "completed", unpack(completed)) end

for _ = 1, n_extend do
  local id, token = ARGV[o + 1], ARGV[o + 2]
  o = o + 2
  if redis.call("HGET", base .. "job:" .. id, "tok") == token then
    redis.call("ZADD", base .. "active", "XX", now + lock_ms, id)
  end
end

local started, limited, next_due, drained = {}, 0, false, 0
if not external then
  -- promote delayed jobs that fell due (priority order is kept by the wait score)
  local head = redis.call("ZRANGE", base .. "delayed", 0, 0, "WITHSCORES")
  if head[2] and tonumber(head[2]) <= now then
    local due = redis.call("ZRANGEBYSCORE", base .. "delayed", "-inf", now, "LIMIT", 0, 1000)
    for _, id in ipairs(due) do
      redis.call("ZREM", base .. "delayed", id)
      enqueue_job(base, base .. "job:" .. id, id, now, 0)
    end
    head = redis.call("ZRANGE", base .. "delayed", 0, 0, "WITHSCORES")
  end
  next_due = head[2] or false

  -- restart jobs whose lock expired (their worker died), at most once per stall_check_ms
  if redis.call("SET", base .. "stall-check", "1", "NX", "PX", stall_check_ms) then
    local stalled = redis.call("ZRANGEBYSCORE", base .. "active", "-inf", now, "LIMIT", 0, 1000)
    for _, id in ipairs(stalled) do
      local jk = base .. "job:" .. id
      redis.call("ZREM", base .. "active", id)
      bump("stalled")
      enqueue_job(base, jk, id, now, 0)
      local grp = redis.call("HGET", jk, "grp")
      if grp then group_left(base, limits, grp) end
    end
  end

  if count > 0 and redis.call("HGET", base .. "meta", "paused") == "1" then count = 0 end
  local lk = base .. "limiter"
  if count > 0 and rate_max > 0 then
    local used = tonumber(redis.call("GET", lk) or "0")
    if used >= rate_max then
      limited = redis.call("PTTL", lk)
      if limited < 0 then redis.call("PEXPIRE", lk, rate_window); limited = rate_window end
      count = 0
    else
      count = math.min(count, rate_max - used)
    end
  end
  if count > 0 then
    local locks, taken, skipped = {}, 0, 0
    -- take jobs in wait order until count are taken; a job of a full group is parked
    -- and does not count, so the loop reads on past it (at most UNPARK_CHUNK skipped per
    -- call, to bound the script: the consumer comes back for the rest)
    while taken < count and drained == 0 and skipped < UNPARK_CHUNK do
      local want = count - taken
      local popped = redis.call("ZPOPMIN", base .. "wait", want)
      if #popped < 2 * want then
        -- nothing waits now: wake-ups left by the jobs just taken would only send other
        -- consumers of the queue round for nothing (a job added later, or a parked one
        -- sent back, leaves its own)
        drained = 1
        redis.call("DEL", base .. "marker")
      end
      for i = 1, #popped, 2 do
        local id = popped[i]
        local jk = base .. "job:" .. id
        local job = redis.call("HMGET", jk, "actor", "data", "am", "as", "prio", "ts", "msa",
          "cfg", "dd", "rn", "grp")
        if not job[1] then
          skipped = skipped + 1
        else
          local starts = tonumber(job[4] or "0") + 1
          local max_started = tonumber(job[7] or "0")
          if max_started > 0 and starts > max_started then
            taken = taken + 1
            redis.call("HSET", jk, "as", starts)
            local reason = "job started " .. starts .. " times, more than max_started_attempts ("
              .. max_started .. ")"
            fail_for_good(jk, id, reason, "", select(4, parse_cfg(job[8])), job[9])
            -- reported so the actor's exhausted hook can record the end durably
            finished[#finished + 1] = {id, "exhausted", 0, job[1], job[2], reason}
          elseif job[11] and group_full(base, limits, job[11]) then
            park(base, job[11], id, popped[i + 1])
            skipped = skipped + 1
          else
            taken = taken + 1
            local run, token = next_run(id, job[10], job[4])
            redis.call("HSET", jk, "as", starts, "rn", run, "state", "active", "pt", now,
              "tok", token)
            if job[11] then group_started(base, job[11]) end
            locks[#locks + 1] = now + lock_ms
            locks[#locks + 1] = id
            started[#started + 1] = {id, job[1], job[2], token, tonumber(job[3] or "0"), starts,
              tonumber(job[5] or "5"), tonumber(job[6] or "0")}
          end
        end
      end
    end
    if #locks > 0 then redis.call("ZADD", base .. "active", unpack(locks)) end
    if rate_max > 0 and #started > 0 then
      if redis.call("INCRBY", lk, #started) == #started then
        redis.call("PEXPIRE", lk, rate_window)
      end
    end
  end
end

for metric, n in pairs(tally) do redis.call("HINCRBY", base .. "metrics", metric, n) end
if tally.completed or tally.failed then
  count_throughput(base, now, tally.completed or 0, tally.failed or 0)
end
if tally.completed then
  prune(base, "completed", now, keep.completed[1], keep.completed[2], 1000)
end
if tally.failed then prune(base, "failed", now, keep.failed[1], keep.failed[2], 1000) end

return {finished, started, next_due, limited, drained}
