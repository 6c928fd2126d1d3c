package kv

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// mappingAt finds the mapping that holds an address in the kernel's maps
// format: an NVMe partition's device (major 259, printed 103), a path
// with spaces and a deleted file's mark change nothing, an anonymous map
// has inode 0, and an address between mappings is in none.
func TestMappingAt(t *testing.T) {
	const maps = `00400000-00452000 r-xp 00000000 08:02 173521      /usr/bin/payments
7f2c4e400000-7f2c4e600000 r--s 00000000 103:02 1234567   /var/lib/pay ments/orders.db (deleted)
7f2c4e600000-7f2c4e601000 rw-p 00000000 00:00 0
not a mapping line
7ffd7c8f1000-7ffd7c912000 rw-p 00000000 00:00 0                          [stack]
`
	for _, c := range []struct {
		addr  uint64
		ino   uint64
		found bool
	}{
		{0x7f2c4e400000, 1234567, true},
		{0x7f2c4e5fffff, 1234567, true},
		{0x7f2c4e600000, 0, true},
		{0x00400010, 173521, true},
		{0x7f2c4e601000, 0, false},
		{0x10, 0, false},
	} {
		ino, found, err := mappingAt(strings.NewReader(maps), c.addr)
		require.NoError(t, err)
		require.Equal(t, c.found, found, "%#x", c.addr)
		require.Equal(t, c.ino, ino, "%#x", c.addr)
	}
	_, _, err := mappingAt(strings.NewReader("1000-2000 r--s 00000000 08:02 x /a.db\n"), 0x1800)
	require.ErrorContains(t, err, "has no inode")
}
