-- Shared helpers, prepended to every herald script (Redis Lua has no include).
-- Key layout, all under base = "<prefix>:{<queue>}:" (the hash tag keeps a queue in one slot):
--   wait      zset  job id -> priority * 2^40 + sequence   (FIFO within a priority)
--   active    zset  job id -> lock deadline (ms)
--   delayed   zset  job id -> run at (ms)
--   completed zset  job id -> finished at (ms)
--   failed    zset  job id -> finished at (ms)
--   job:<id>  hash  the job record: actor, data, prio, ts, cfg, state, [msa, am, as, rn, pt,
--                   ft, rt, rp, tok, msg, cl, dd, run_at, fr, st, rv] (an absent counter is
--                   0); rn counts every start for good, rt is when it was last retried in
--                   place, rp when it was last replayed after completing,
--                   tok the fence token of its latest run, msg the id of its current
--                   message and cl the id of the claim that started its latest run
--                   (RabbitMQ); grp the job's group key
--   parked    zset  job id -> wait score: waiting jobs set aside by the fetch because their
--                   group was at its limit (Redis broker); still "waiting" to every reader
--   parked:<g> zset the same, of group g only (its head goes back to wait when a slot frees)
--   groups    hash  group key -> how many of its jobs are active now
--   dedup:<d> string the id of the job holding dedup id d
--   meta      hash  paused flag; seq counter
--   metrics   hash  completed, failed, retried, deferred, stalled, deduplicated, duplicated
--   tp:<m>    hash  c, f: jobs completed and failed for good in minute m (= ms // 60000);
--                   expires THROUGHPUT_KEEP_MS after its first count (see count_throughput)
--   marker    list  wake-ups for consumers blocked waiting for work
--   limiter   string jobs started in the current rate-limit window (expires with it)
--   removed:<c> string what remove call c answered (expires; see remove.lua)
local PRIORITY_SHIFT = 1099511627776 -- 2^40
local MARKER_CAP = 63
-- The hour of history Ledger.history reads (HISTORY_MINUTES), plus a minute: a minute's
-- key is created during that minute and read for the 59 after it, and the spare minute
-- absorbs clock skew between the hosts that stamp `now`.
local THROUGHPUT_KEEP_MS = 61 * 60000

-- Parked jobs a freed slot sends back to wait per call, at most (a limit raised a lot, or
-- removed, frees many slots at once; the next release sends more).
local UNPARK_CHUNK = 1000

local function wait_score(base, priority)
  local seq = redis.call("HINCRBY", base .. "meta", "seq", 1)
  return tonumber(priority) * PRIORITY_SHIFT + seq
end

local function wake(base, n)
  for _ = 1, math.min(n, MARKER_CAP + 1) do redis.call("LPUSH", base .. "marker", "1") end
  redis.call("LTRIM", base .. "marker", 0, MARKER_CAP)
end

-- Release dedup id dd if job id still holds it (a newer job may hold it now).
local function release_dedup(base, dd, id)
  if dd and dd ~= "" then
    local dk = base .. "dedup:" .. dd
    if redis.call("GET", dk) == id then redis.call("DEL", dk) end
  end
end

-- Make a job waiting (or delayed when run_at is in the future).
local function enqueue_job(base, jk, id, now, run_at, prio)
  if run_at > now then
    redis.call("ZADD", base .. "delayed", run_at, id)
    redis.call("HSET", jk, "state", "delayed", "run_at", run_at)
  else
    prio = prio or redis.call("HGET", jk, "prio") or "5"
    redis.call("ZADD", base .. "wait", wait_score(base, prio), id)
    redis.call("HSET", jk, "state", "waiting", "run_at", "")
  end
end

-- Keep at most keep_count records and none older than keep_age_ms in a finished set,
-- removing at most limit per call so a script never runs long. A finished job released its
-- dedup key when it finished, so pruning only deletes records.
local function prune(base, set, now, keep_count, keep_age_ms, limit)
  local key = base .. set
  local doomed = {}
  if keep_age_ms >= 0 then
    doomed = redis.call("ZRANGEBYSCORE", key, "-inf", now - keep_age_ms, "LIMIT", 0, limit)
  end
  if keep_count >= 0 and #doomed < limit then
    local excess = redis.call("ZCARD", key) - keep_count - #doomed
    if excess > 0 then
      local last = #doomed + math.min(excess, limit - #doomed) - 1
      for _, id in ipairs(redis.call("ZRANGE", key, #doomed, last)) do doomed[#doomed + 1] = id end
    end
  end
  if #doomed == 0 then return 0 end
  local keys = {}
  for i, id in ipairs(doomed) do keys[i] = base .. "job:" .. id end
  for i = 1, #keys, 500 do
    local j = math.min(i + 499, #keys)
    redis.call("DEL", unpack(keys, i, j))
    redis.call("ZREM", key, unpack(doomed, i, j))
  end
  return #doomed
end

-- Finish one job for good: outcome is "completed" or "failed"; remove drops the record.
-- Callers bump the metrics, count the throughput and prune the finished set once per
-- script call.
local function finish_job(base, jk, id, now, outcome, remove, dd)
  redis.call("ZREM", base .. "active", id)
  release_dedup(base, dd, id)
  if remove then
    redis.call("DEL", jk)
  else
    redis.call("HSET", jk, "state", outcome, "ft", now)
    redis.call("ZADD", base .. outcome, now, id)
  end
end

-- Count jobs that finished for good into the current minute's throughput hash (read by
-- Ledger.history). Callers tally per script call and count once, so the cost per call is
-- fixed: at most two HINCRBYs, and a PEXPIRE only when a count creates its field (a new
-- minute key always does), never a scan.
local function count_throughput(base, now, completed, failed)
  local key = base .. "tp:" .. math.floor(now / 60000)
  local created = false
  if completed > 0 then created = redis.call("HINCRBY", key, "c", completed) == completed end
  if failed > 0 then created = (redis.call("HINCRBY", key, "f", failed) == failed) or created end
  if created then redis.call("PEXPIRE", key, THROUGHPUT_KEEP_MS) end
end

-- The number and fence token of a job's next run. The token is unique for good: rn counts
-- every start and nothing resets it (a retry resets the attempt counters, not rn), so a
-- run that outlived its lock can never finish or fail a later run. Records from before rn
-- existed count on from their attempts started.
local function next_run(id, runs, starts)
  local n = tonumber(runs or starts or "0") + 1
  return n, id .. "#" .. n
end

local function backoff_ms(kind, base_ms, attempt)
  if kind == "n" or attempt < 2 then return 0 end
  if kind == "f" then return base_ms end
  return base_ms * (2 ^ (attempt - 2))
end

-- A job's retry and retention config, one field "attempts:backoff kind:base ms:options"
-- (options: "c" remove on complete, "f" remove on fail).
local function parse_cfg(cfg)
  local attempts, kind, base_ms, options = string.match(cfg or "", "^(%d+):(%a):(%d+):(%a*)$")
  return tonumber(attempts or "1"), kind or "e", tonumber(base_ms or "0"), options or ""
end

local function has_option(options, flag)
  return options ~= nil and string.find(options, flag, 1, true) ~= nil
end

-- Group limits passed to a script at ARGV offset o: the limit of groups not listed (0 =
-- unlimited), the number n of listed groups, then n pairs group key, limit. Returns the
-- limits and the offset of the argument after them.
local function read_group_limits(o)
  local default, n = tonumber(ARGV[o + 1]), tonumber(ARGV[o + 2])
  local by_group = {}
  for i = 1, n do by_group[ARGV[o + 1 + 2 * i]] = tonumber(ARGV[o + 2 + 2 * i]) end
  return {default = default > 0 and default or false, by_group = by_group}, o + 2 + 2 * n
end

local function group_limit(limits, grp)
  return limits.by_group[grp] or limits.default
end

-- True when group grp may not start another job now.
local function group_full(base, limits, grp)
  local limit = group_limit(limits, grp)
  return limit and tonumber(redis.call("HGET", base .. "groups", grp) or "0") >= limit
end

-- A job of group grp became active. Every grouped job is counted, limited or not, so a
-- limit declared later is right from its first use.
local function group_started(base, grp)
  redis.call("HINCRBY", base .. "groups", grp, 1)
end

-- Set a waiting job aside while its group is full, keeping its wait score (its place).
local function park(base, grp, id, score)
  redis.call("ZADD", base .. "parked", score, id)
  redis.call("ZADD", base .. "parked:" .. grp, score, id)
end

-- Send up to n of group grp's parked jobs back to wait, oldest (best scored) first, at
-- their own scores, and wake as many consumers.
local function unpark(base, grp, n)
  local popped = redis.call("ZPOPMIN", base .. "parked:" .. grp, n)
  if #popped == 0 then return end
  local ids, back = {}, {}
  for i = 1, #popped, 2 do
    ids[#ids + 1] = popped[i]
    back[#back + 1] = popped[i + 1]
    back[#back + 1] = popped[i]
  end
  redis.call("ZREM", base .. "parked", unpack(ids))
  redis.call("ZADD", base .. "wait", unpack(back))
  wake(base, #ids)
end

-- A job of group grp stopped being active (whatever the reason): its slot is free, so as
-- many parked jobs of the group as now fit go back to wait.
local function group_left(base, limits, grp)
  local left = redis.call("HINCRBY", base .. "groups", grp, -1)
  if left <= 0 then
    redis.call("HDEL", base .. "groups", grp)
    left = 0
  end
  local limit = group_limit(limits, grp)
  local room = limit and (limit - left) or UNPARK_CHUNK
  if room > 0 then unpark(base, grp, math.min(room, UNPARK_CHUNK)) end
end

-- Take a job out of the parked sets, if it is there (it is removed, or re-issued).
local function unpark_job(base, grp, id)
  if redis.call("ZREM", base .. "parked", id) == 1 and grp then
    redis.call("ZREM", base .. "parked:" .. grp, id)
  end
end
