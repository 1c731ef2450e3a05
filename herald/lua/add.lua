-- Add jobs. ARGV: base, now_ms, n, then per job 13 fields:
--   id, actor, data, priority, run_at_ms, dedup_id ("" = none), retry_failed ("1"/"0"),
--   attempts, backoff kind (e|f|n), backoff base ms, max started (0 = unbounded),
--   options ("c" remove on complete, "f" remove on fail), token ("" = none)
-- Returns per job: {status, job id} with status added|duplicated|deduplicated|retried.
local base, now, n = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local results = {}
local woken = 0
for i = 0, n - 1 do
  local o = 3 + i * 13
  local id, actor, data, prio = ARGV[o + 1], ARGV[o + 2], ARGV[o + 3], ARGV[o + 4]
  local run_at, dd, retry_failed = tonumber(ARGV[o + 5]), ARGV[o + 6], ARGV[o + 7]
  local jk = base .. "job:" .. id
  local state = redis.call("HGET", jk, "state")
  if state then
    if state == "failed" and retry_failed == "1" then
      redis.call("ZREM", base .. "failed", id)
      redis.call("HSET", jk, "am", 0, "as", 0, "tok", ARGV[o + 13])
      redis.call("HDEL", jk, "ft", "fr", "st", "rv")
      if dd ~= "" and redis.call("SET", base .. "dedup:" .. dd, id, "NX") then
        redis.call("HSET", jk, "dd", dd)
      end
      enqueue_job(base, jk, id, now, run_at)
      woken = woken + 1
      results[#results + 1] = {"retried", id}
    else
      redis.call("HINCRBY", base .. "metrics", "duplicated", 1)
      results[#results + 1] = {"duplicated", id}
    end
  else
    local holder = false
    if dd ~= "" then
      holder = redis.call("GET", base .. "dedup:" .. dd)
      if not holder then redis.call("SET", base .. "dedup:" .. dd, id) end
    end
    if holder then
      redis.call("HINCRBY", base .. "metrics", "deduplicated", 1)
      results[#results + 1] = {"deduplicated", holder}
    else
      redis.call("HSET", jk, "actor", actor, "data", data, "prio", prio, "am", 0, "as", 0,
        "ts", now, "att", ARGV[o + 8], "bk", ARGV[o + 9], "bb", ARGV[o + 10],
        "msa", ARGV[o + 11], "opt", ARGV[o + 12])
      if dd ~= "" then redis.call("HSET", jk, "dd", dd) end
      if ARGV[o + 13] ~= "" then redis.call("HSET", jk, "tok", ARGV[o + 13]) end
      enqueue_job(base, jk, id, now, run_at, prio)
      woken = woken + 1
      results[#results + 1] = {"added", id}
    end
  end
end
if woken > 0 then wake(base, woken) end
return results
