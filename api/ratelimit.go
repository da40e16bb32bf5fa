package api

import "strings"

// BucketRateLimits holds, by rate limit, the task starts of its window,
// shared by every controller of a cluster (controllers only).
const BucketRateLimits = "rate_limits"

// RateLimitedPrefix starts the status reason of a job, and of a node's
// step, held back by a rate limit of the controllers' config.
const RateLimitedPrefix = "rate limited: "

// RateLimited reports whether a status reason says a rate limit holds the
// job or step back.
func RateLimited(reason string) bool { return strings.HasPrefix(reason, RateLimitedPrefix) }
