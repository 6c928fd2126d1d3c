//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package kv

import (
	"errors"
	"os"
)

// lockedForReading cannot tell, where bbolt does not lock with flock,
// whether a writer holds f: it answers as if none did, and the checks it
// guards run as they would on a file at rest.
func lockedForReading(*os.File) (unlock func(), ok bool) { return func() {}, true }

// mapFile is not used here: the file is read with ReadAt.
func mapFile(*os.File, int64) ([]byte, func(), error) {
	return nil, nil, errors.New("kv: no memory map here")
}
