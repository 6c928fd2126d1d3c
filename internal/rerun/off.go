//go:build !oncekv_rerun

package rerun

// Enabled reports whether this build runs every bbolt transaction's
// function twice (-tags oncekv_rerun).
const Enabled = false

// Again reports whether the transaction function running on this
// goroutine runs the second of a rerun build's two runs. Never, in a
// normal build.
func Again() bool { return false }

// Begin and End bracket a second run: nothing, in a normal build.
func Begin() {}

// End ends what Begin began.
func End() {}
