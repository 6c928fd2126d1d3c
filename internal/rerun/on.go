//go:build oncekv_rerun

package rerun

import (
	"sync"

	"github.com/oncekv/oncekv/internal/goid"
)

// Enabled reports whether this build runs every bbolt transaction's
// function twice (-tags oncekv_rerun).
const Enabled = true

// again holds the goroutines running a second run: a transaction's
// function runs on the goroutine that began it (bbolt's Update and View,
// and group commit's leader running every call of its batch).
var again sync.Map

// Again reports whether the transaction function running on this
// goroutine runs the second of a rerun build's two runs: the one that
// repeats a run rolled back (or void, for a read), which a test's counter
// of its own calls leaves out (kvtest.Counts). A first run whose function
// failed is the only one.
func Again() bool {
	_, ok := again.Load(goid.ID())
	return ok
}

// Begin marks this goroutine as running a second run, until End.
func Begin() { again.Store(goid.ID(), struct{}{}) }

// End ends what Begin began.
func End() { again.Delete(goid.ID()) }
