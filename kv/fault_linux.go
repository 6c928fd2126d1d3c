package kv

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// mappedFrom reports whether addr lies in a memory mapping of the file fi
// describes: the mapping of /proc/self/maps that holds addr, compared by
// inode. known is false when the maps cannot be read, fi has no inode, or
// no mapping holds addr.
//
// The inode alone decides. A map of another file with the same inode
// number on another device counts as the file's, which errs on the safe
// side: the database refuses calls, as after a fault on its file. The
// device, which the kernel prints in a form of its own, could only err on
// the other: a fault on the file taken for the caller's, and the database
// serving on a disk that fails its reads.
func mappedFrom(fi os.FileInfo, addr uintptr) (yes, known bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return false, false
	}
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return false, false
	}
	defer func() { _ = f.Close() }()
	ino, found, err := mappingAt(f, uint64(addr))
	if err != nil || !found {
		// In no mapping: memory never mapped, or unmapped since, which
		// may be the file's own old map (bbolt remaps the file as it
		// grows, and may have done so since the faulting transaction let
		// go of its map).
		return false, false
	}
	return ino == uint64(st.Ino), true //nolint:unconvert // uint32 on some platforms
}

// mappingAt returns the inode of the mapping, in maps (the format of
// /proc/PID/maps: "start-end perms offset major:minor inode [path]"), that
// holds addr; found is false when none does. An anonymous mapping has
// inode 0.
func mappingAt(maps io.Reader, addr uint64) (ino uint64, found bool, err error) {
	sc := bufio.NewScanner(maps)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		start, end, ok := strings.Cut(fields[0], "-")
		if !ok {
			continue
		}
		lo, err1 := strconv.ParseUint(start, 16, 64)
		hi, err2 := strconv.ParseUint(end, 16, 64)
		if err1 != nil || err2 != nil || addr < lo || addr >= hi {
			continue
		}
		if ino, err = strconv.ParseUint(fields[4], 10, 64); err != nil {
			return 0, false, fmt.Errorf("kv: the mapping at %#x has no inode: %w", addr, err)
		}
		return ino, true, nil
	}
	return 0, false, sc.Err()
}
