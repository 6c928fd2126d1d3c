package sideeffect

import "github.com/oncekv/oncekv/internal/backoff"

// Backoff computes retry delays: exponential growth from Base, capped at
// Cap, with full jitter (a uniformly random delay between 0 and the capped
// exponential), so that many clients retrying the same failure spread out
// instead of arriving together.
type Backoff = backoff.Backoff
