-- Start a job whose message another broker (RabbitMQ) delivered.
-- ARGV: base, now, lock_ms, id, message id, rate_max (0 = none), rate_window_ms, claim id
--   (unique to this call; kept on the job as cl), group wait ms, then the queue's group
--   limits (see read_group_limits)
-- Returns {"start", attempts made, attempts started, run token} to run it, {"drop"} when
-- the message is not the job's current one (or the job is gone or finished), {"later", ms}
-- when the message must come back later (queue paused, the job's group at its limit
-- — after group wait ms —, rate limit reached, or a live run holds the lock), {"failed", reason, run token} when the job exceeded
-- max_started_attempts (it is then active and the caller finishes it as a permanent
-- failure under that token). The run token, not the message id, fences the run: a
-- message redelivered after a stall starts a run of its own.
-- The same call sent again after its reply was lost (a client retry on a timeout) carries
-- the same claim id: finding the job active under it, it answers as the first send did
-- (same run token, no start counted), so the run goes ahead instead of waiting out its
-- own lock. Only that very call has the claim id: a copy of the message claimed at the
-- same millisecond by another worker is still told to come back later.
local base, now, lock_ms = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local id, message = ARGV[4], ARGV[5]
local rate_max, rate_window, claim = tonumber(ARGV[6]), tonumber(ARGV[7]), ARGV[8]
local group_wait = tonumber(ARGV[9])
local limits = read_group_limits(9)
local jk = base .. "job:" .. id
local job = redis.call("HMGET", jk, "state", "msg", "am", "as", "msa", "rn", "tok", "cl",
  "grp")
local grp = job[9]
local state = job[1]
local max_started = tonumber(job[5] or "0")

local function verdict(starts, token)
  if max_started > 0 and starts > max_started then
    -- the caller finishes it as a permanent failure with this reason
    return {"failed", "job started " .. starts .. " times, more than max_started_attempts ("
      .. max_started .. ")", token}
  end
  return {"start", job[3] or "0", starts, token}
end

-- records written before msg existed kept the message id in tok
if not state or (job[2] or job[7]) ~= message then return {"drop"} end
if state == "active" then
  if job[8] == claim then return verdict(tonumber(job[4]), job[7]) end -- sent again
  local deadline = tonumber(redis.call("ZSCORE", base .. "active", id) or "0")
  if deadline > now then return {"later", deadline - now} end
  redis.call("HINCRBY", base .. "metrics", "stalled", 1)
elseif state ~= "waiting" and state ~= "delayed" then
  return {"drop"}
end
if redis.call("HGET", base .. "meta", "paused") == "1" then return {"later", 1000} end
-- a run taking over a stalled one keeps the slot that run held; a new run needs a free one
-- (checked before the rate limit, so a job held back by its group spends no start of it)
local takes_slot = grp and state ~= "active"
if takes_slot and group_full(base, limits, grp) then return {"later", group_wait} end
if rate_max > 0 then
  local lk = base .. "limiter"
  local used = redis.call("INCR", lk)
  if used == 1 then redis.call("PEXPIRE", lk, rate_window) end
  if used > rate_max then
    local ttl = redis.call("PTTL", lk)
    if ttl < 0 then redis.call("PEXPIRE", lk, rate_window); ttl = rate_window end
    return {"later", ttl}
  end
end
local starts = tonumber(job[4] or "0") + 1
local run, token = next_run(id, job[6], job[4])
redis.call("ZREM", base .. "wait", id)
redis.call("ZREM", base .. "delayed", id)
redis.call("HSET", jk, "as", starts, "rn", run, "state", "active", "pt", now, "tok", token,
  "msg", message, "cl", claim)
redis.call("ZADD", base .. "active", now + lock_ms, id)
if takes_slot then group_started(base, grp) end
return verdict(starts, token)
