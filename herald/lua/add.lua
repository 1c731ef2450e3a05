-- Add jobs. ARGV: base, now_ms, n, then per job 13 fields:
--   id, actor, data, priority, run_at_ms, dedup_id ("" = none), retry_failed ("1"/"0"),
--   attempts, backoff kind (e|f|n), backoff base ms, max started (0 = unbounded),
--   options ("c" remove on complete, "f" remove on fail), token ("" = none)
-- Returns per job: {status, job id} with status added|duplicated|deduplicated|retried.
local base, now, n = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local results, waiting = {}, {}
local counts = {added = 0, duplicated = 0, deduplicated = 0, retried = 0}
-- reserve n sequence numbers at once: FIFO order within a priority
local seq = redis.call("HINCRBY", base .. "meta", "seq", n) - n
for i = 0, n - 1 do
  local o = 3 + i * 13
  local id, actor, data, prio = ARGV[o + 1], ARGV[o + 2], ARGV[o + 3], ARGV[o + 4]
  local run_at, dd, retry_failed = tonumber(ARGV[o + 5]), ARGV[o + 6], ARGV[o + 7]
  local jk = base .. "job:" .. id
  local state = redis.call("HGET", jk, "state")
  local status
  if state then
    status = "duplicated"
    if state == "failed" and retry_failed == "1" then
      redis.call("ZREM", base .. "failed", id)
      redis.call("HSET", jk, "am", 0, "as", 0, "tok", ARGV[o + 13])
      redis.call("HDEL", jk, "ft", "fr", "st", "rv")
      if dd ~= "" and redis.call("SET", base .. "dedup:" .. dd, id, "NX") then
        redis.call("HSET", jk, "dd", dd)
      end
      enqueue_job(base, jk, id, now, run_at)
      status = "retried"
    end
    results[#results + 1] = {status, id}
  else
    local holder = false
    if dd ~= "" then
      holder = redis.call("GET", base .. "dedup:" .. dd)
      if not holder then redis.call("SET", base .. "dedup:" .. dd, id) end
    end
    if holder then
      status = "deduplicated"
      results[#results + 1] = {status, holder}
    else
      status = "added"
      local delayed = run_at > now
      redis.call("HSET", jk, "actor", actor, "data", data, "prio", prio, "am", 0, "as", 0,
        "ts", now, "att", ARGV[o + 8], "bk", ARGV[o + 9], "bb", ARGV[o + 10],
        "msa", ARGV[o + 11], "opt", ARGV[o + 12], "tok", ARGV[o + 13], "dd", dd,
        "state", delayed and "delayed" or "waiting", "run_at", delayed and run_at or "")
      if delayed then
        redis.call("ZADD", base .. "delayed", run_at, id)
      else
        seq = seq + 1
        waiting[#waiting + 1] = tonumber(prio) * PRIORITY_SHIFT + seq
        waiting[#waiting + 1] = id
      end
      results[#results + 1] = {status, id}
    end
  end
  counts[status] = counts[status] + 1
end
for i = 1, #waiting, 1000 do
  redis.call("ZADD", base .. "wait", unpack(waiting, i, math.min(i + 999, #waiting)))
end
for _, metric in ipairs({"duplicated", "deduplicated"}) do
  if counts[metric] > 0 then redis.call("HINCRBY", base .. "metrics", metric, counts[metric]) end
end
if counts.added + counts.retried > 0 then wake(base, counts.added + counts.retried) end
return results
