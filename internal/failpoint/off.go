//go:build !failpoints

package failpoint

// Enabled reports whether this build can crash at failpoints.
const Enabled = false

// Inject does nothing in a normal build.
func Inject(string) {}
