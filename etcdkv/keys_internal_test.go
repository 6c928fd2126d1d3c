package etcdkv

import (
	"encoding/binary"
	"math"
	"testing"
)

// splitData takes a value's key apart, and refuses one whose length
// prefix says more than the key holds, however large the length (one past
// math.MaxInt64 would turn negative as an int).
func TestSplitData(t *testing.T) {
	t.Parallel()
	k := keys{prefix: "/p/"}
	name, prefix, ok := k.splitData(k.data([]byte("orders"), []byte("o-1")))
	if !ok || string(name) != "orders" || prefix != k.dataPrefix([]byte("orders")) {
		t.Fatalf("splitData = %q, %q, %v", name, prefix, ok)
	}
	for _, n := range []uint64{7, math.MaxInt64, math.MaxInt64 + 1, math.MaxUint64} {
		bad := string(binary.AppendUvarint([]byte("/p/k"), n)) + "orders"
		if _, _, ok := k.splitData(bad); ok {
			t.Errorf("length %d: a key shorter than its length prefix was taken apart", n)
		}
	}
	if _, _, ok := k.splitData("/p/k\xff"); ok {
		t.Error("a key with a truncated length prefix was taken apart")
	}
}
