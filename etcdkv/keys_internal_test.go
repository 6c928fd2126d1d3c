package etcdkv

import (
	"encoding/binary"
	"math"
	"slices"
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

// mergeSpans joins the ranges a commit compares where they overlap or
// touch, and keeps apart those that do not: a span it shortened would
// leave keys a transaction scanned unguarded.
func TestMergeSpans(t *testing.T) {
	t.Parallel()
	got := mergeSpans([]span{{"e", "f"}, {"a", "c"}, {"b", "d"}, {"g", "z"}, {"h", "i"}, {"d", "e"}})
	want := []span{{"a", "f"}, {"g", "z"}}
	if !slices.Equal(got, want) {
		t.Errorf("mergeSpans = %v, want %v", got, want)
	}
	if got := mergeSpans([]span{{"m", "n"}, {"a", "b"}}); !slices.Equal(got, []span{{"a", "b"}, {"m", "n"}}) {
		t.Errorf("mergeSpans kept apart = %v", got)
	}
}
