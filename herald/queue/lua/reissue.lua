-- Re-issue the waiting jobs of a queue whose messages live in another broker (RabbitMQ),
-- a chunk per call, in wait order (priority, then arrival): each gets a fresh token, so
-- the message the caller publishes now is the only one that can start it (an older one
-- is dropped on arrival). The first call (after = "-inf") first makes delayed jobs that
-- fell due waiting, as the Redis broker's consumer does, and sends parked jobs (set aside
-- by a Redis broker's fetch) back to wait: here the claim enforces group limits.
-- ARGV: base, now, token prefix, after (wait score of the previous chunk's last job, or
--   "-inf"), limit, tokens issued so far (numbers this chunk's tokens)
-- Returns {rows, last wait score or false}; rows: {id, actor, data, priority, token}.
local base, now, prefix = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local after, limit, issued = ARGV[4], tonumber(ARGV[5]), tonumber(ARGV[6])
if after == "-inf" then
  local due = redis.call("ZRANGEBYSCORE", base .. "delayed", "-inf", now, "LIMIT", 0, limit)
  for _, id in ipairs(due) do
    redis.call("ZREM", base .. "delayed", id)
    enqueue_job(base, base .. "job:" .. id, id, now, 0)
  end
  while true do
    local parked = redis.call("ZRANGE", base .. "parked", 0, limit - 1, "WITHSCORES")
    if #parked == 0 then break end
    for i = 1, #parked, 2 do
      local grp = redis.call("HGET", base .. "job:" .. parked[i], "grp")
      unpark_job(base, grp, parked[i])
      if grp then redis.call("ZADD", base .. "wait", parked[i + 1], parked[i]) end
    end
  end
else
  after = "(" .. after
end
local chunk = redis.call("ZRANGEBYSCORE", base .. "wait", after, "+inf", "WITHSCORES",
  "LIMIT", 0, limit)
local rows, last = {}, false
for i = 1, #chunk, 2 do
  local id = chunk[i]
  local jk = base .. "job:" .. id
  local job = redis.call("HMGET", jk, "actor", "data", "prio")
  local token = prefix .. "-" .. (issued + #rows + 1)
  redis.call("HSET", jk, "msg", token)
  rows[#rows + 1] = {id, job[1], job[2], tonumber(job[3] or "5"), token}
  last = chunk[i + 1]
end
return {rows, last}
