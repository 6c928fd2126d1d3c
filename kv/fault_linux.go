package kv

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// mappedFrom reports whether addr lies in a memory mapping of the file fi
// describes, from /proc/self/maps: the mapping that holds addr, and its
// device and inode. known is false when the maps cannot be read, fi
// names no device and inode, or no mapping holds addr.
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
	dev := fmt.Sprintf("%02x:%02x", devMajor(uint64(st.Dev)), devMinor(uint64(st.Dev))) //nolint:unconvert // uint32 on some platforms
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// start-end perms offset major:minor inode [path]
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
		if err1 != nil || err2 != nil || uint64(addr) < lo || uint64(addr) >= hi {
			continue
		}
		ino, err := strconv.ParseUint(fields[4], 10, 64)
		return err == nil && ino == uint64(st.Ino) && fields[3] == dev, err == nil
	}
	// In no mapping: memory never mapped, or unmapped since, which may be
	// the file's own old map (bbolt remaps the file as it grows, and may
	// have done so since the faulting transaction let go of its map).
	return false, false
}

// devMajor and devMinor split a Linux device number as glibc's major
// and minor macros do; /proc/self/maps prints them in hex.
func devMajor(dev uint64) uint64 { return (dev>>8)&0xfff | (dev>>32)&^uint64(0xfff) }
func devMinor(dev uint64) uint64 { return dev&0xff | (dev>>12)&^uint64(0xff) }
