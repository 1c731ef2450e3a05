-- Claim one tick of a repeatable schedule (or take over a claimed tick whose job was not
-- added): a compare-and-set of a score, so of several clocks exactly one wins.
-- ARGV: zset key, member, expected score, new score, claimed-ticks zset key,
--   tick ("<due ms>:<schedule name>"), now (ms)
-- A win also records the tick as claimed at `now`; the winner removes it once the tick's
-- job is added. Returns 1 when this caller won, 0 otherwise.
local current = redis.call("ZSCORE", ARGV[1], ARGV[2])
if current and tonumber(current) == tonumber(ARGV[3]) then
  redis.call("ZADD", ARGV[1], ARGV[4], ARGV[2])
  redis.call("ZADD", ARGV[5], ARGV[7], ARGV[6])
  return 1
end
return 0
