-- Remove jobs (q.remove, drain, clean). An active job is not removed (its worker holds
-- the lock); a parked one is (it is waiting). Each removal releases the job's dedup key if the job still holds it.
-- ARGV: base, call id (unique to this call), keep_ms, id... Returns the number removed.
-- The answer is kept keep_ms under the call id: the same call sent again after its reply
-- was lost (a client retry on a timeout) answers it again and removes nothing more, so a
-- job re-added between the two sends stays, and drain does not stop on a false 0.
local base, keep_ms = ARGV[1], tonumber(ARGV[3])
local answer = base .. "removed:" .. ARGV[2]
local earlier = redis.call("GET", answer)
if earlier then return tonumber(earlier) end
local removed = 0
for i = 4, #ARGV do
  local id = ARGV[i]
  local jk = base .. "job:" .. id
  local job = redis.call("HMGET", jk, "state", "dd", "grp")
  if job[1] and job[1] ~= "active" then
    release_dedup(base, job[2], id)
    for _, set in ipairs({"wait", "delayed", "completed", "failed"}) do
      redis.call("ZREM", base .. set, id)
    end
    unpark_job(base, job[3], id)
    redis.call("DEL", jk)
    removed = removed + 1
  end
end
redis.call("SET", answer, removed, "PX", keep_ms)
return removed
