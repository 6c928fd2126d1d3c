package sideeffect_test

import (
	"testing"

	"github.com/oncekv/oncekv/kv/kvtest"
)

// faultSink keeps the reads of a faulting map from being optimised away.
var faultSink byte

// A completion that faults on memory of its own (a file it maps, cut
// short beneath it) has panicked like any other: its transaction rolls
// back, the pass logs it, and the intent completes once the completion
// is mended. The database is not at fault and serves on (a fault on its
// file is kv's: TestACompletionsReadFaultReachesKV).
func TestACompletionsFaultOnItsOwnMapIsItsPanic(t *testing.T) {
	t.Parallel()
	kvtest.RequireLocal(t, "on etcd no transaction catches faults: this one would end the process")
	own := kvtest.CutShortMap(t)
	survivesABrokenCompletion(t, func() { faultSink += own[0] }, "runtime error: invalid memory address")
}
