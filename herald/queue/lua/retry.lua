-- Retry a failed job in place (q.retry): both attempt counters reset; the run counter
-- (rn) does not, so the next run's token differs from every earlier run's.
-- ARGV: base, now, id, message id (of the message that will carry it, RabbitMQ; or "")
-- Returns 1 when retried, 0 when the job is not failed. The same call sent again after its
-- reply was lost (a client retry on a timeout) carries the same now, so finding the job
-- retried at that now (rt) it answers 1 again, and the caller still publishes.
local base, now, id = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local jk = base .. "job:" .. id
local job = redis.call("HMGET", jk, "state", "rt")
if job[1] ~= "failed" then
  return job[2] == ARGV[2] and 1 or 0
end
redis.call("ZREM", base .. "failed", id)
redis.call("HSET", jk, "am", 0, "as", 0, "msg", ARGV[4], "rt", now)
redis.call("HDEL", jk, "ft", "fr", "st", "rv")
local dd = redis.call("HGET", jk, "dd")
if dd and not redis.call("SET", base .. "dedup:" .. dd, id, "NX") then
  redis.call("HDEL", jk, "dd") -- a newer job holds the key now; this one must not release it
end
enqueue_job(base, jk, id, now, 0)
wake(base, 1)
return 1
