-- Retry a failed job in place (q.retry): both attempt counters reset.
-- ARGV: base, now, id, next token. Returns 1 when retried, 0 when the job is not failed.
local base, now, id = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local jk = base .. "job:" .. id
if redis.call("HGET", jk, "state") ~= "failed" then return 0 end
redis.call("ZREM", base .. "failed", id)
redis.call("HSET", jk, "am", 0, "as", 0, "tok", ARGV[4])
redis.call("HDEL", jk, "ft", "fr", "st", "rv")
local dd = redis.call("HGET", jk, "dd")
if dd and not redis.call("SET", base .. "dedup:" .. dd, id, "NX") then
  redis.call("HDEL", jk, "dd") -- a newer job holds the key now; this one must not release it
end
enqueue_job(base, jk, id, now, 0)
wake(base, 1)
return 1
