-- Remove jobs (q.remove, drain, clean). An active job is not removed (its worker holds
-- the lock). Each removal releases the job's dedup key if the job still holds it.
-- ARGV: base, id... Returns the number removed.
local base = ARGV[1]
local removed = 0
for i = 2, #ARGV do
  local id = ARGV[i]
  local jk = base .. "job:" .. id
  local state = redis.call("HGET", jk, "state")
  if state and state ~= "active" then
    release_dedup(base, redis.call("HGET", jk, "dd"), id)
    for _, set in ipairs({"wait", "delayed", "completed", "failed"}) do
      redis.call("ZREM", base .. set, id)
    end
    redis.call("DEL", jk)
    removed = removed + 1
  end
end
return removed
