//go:build !linux

package kv

import "os"

// mappedFrom cannot tell here which file a faulting address belongs to:
// known is false, and the caller takes the fault as the file's.
func mappedFrom(os.FileInfo, uintptr) (yes, known bool) { return false, false }
