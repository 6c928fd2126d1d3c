//go:build !unix

package bench

import "time"

// processCPU reports no CPU time where getrusage is missing: the harness
// then leaves Result.CPUus at 0.
func processCPU() (time.Duration, bool) { return 0, false }
