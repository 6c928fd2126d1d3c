package goid

import (
	"bytes"
	"runtime"
	"strconv"
)

// ID returns the running goroutine's number, never 0.
func ID() uint64 {
	var buf [64]byte
	line := buf[:runtime.Stack(buf[:], false)]
	line = bytes.TrimPrefix(line, []byte("goroutine "))
	if i := bytes.IndexByte(line, ' '); i > 0 {
		line = line[:i]
	}
	n, _ := strconv.ParseUint(string(line), 10, 64)
	return n
}
