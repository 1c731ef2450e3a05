-- Claim one tick of a repeatable schedule: compare-and-set of its next run time, so of
-- several clock processes exactly one fires each tick.
-- KEYS: none. ARGV: next-runs zset key, schedule name, expected due (ms), following due (ms)
-- Returns 1 when this caller won the tick, 0 otherwise.
local current = redis.call("ZSCORE", ARGV[1], ARGV[2])
if current and tonumber(current) == tonumber(ARGV[3]) then
  redis.call("ZADD", ARGV[1], ARGV[4], ARGV[2])
  return 1
end
return 0
