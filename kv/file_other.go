//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package kv

import (
	"errors"
	"os"
)

// lockedForReading reports, where bbolt does not lock with flock, that it
// cannot tell whether a writer holds f.
func lockedForReading(*os.File) (unlock func(), ok bool) { return nil, false }

// mapFile is not used here: the file is read with ReadAt.
func mapFile(*os.File, int64) ([]byte, func(), error) {
	return nil, nil, errors.New("kv: no memory map here")
}
