//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly || windows)

package command

import "os"

// lockDatabase cannot tell here whether a process has the database open
// (bbolt locks with fcntl on these systems): stop the service first. A
// service that kept it open would go on with the old file, under its
// second name, until restarted.
func lockDatabase(*os.File) (held bool, err error) { return false, nil }

const lockThroughSwap = true
