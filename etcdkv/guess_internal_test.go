package etcdkv

import (
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
)

// The gate pauses guessing where most guesses are refused, for longer
// each time they still are, and not where refusals are the few that
// concurrency makes.
func TestGuessGate(t *testing.T) {
	var g guessGate
	var paused atomic.Uint64
	// run plays n transactions whose guesses are refused with probability
	// p, and returns how many guessed.
	run := func(n int, p float64, r *rand.Rand) (guessed int) {
		for range n {
			if g.allow(&paused) {
				guessed++
				g.fared(r.Float64() < p)
			}
		}
		return guessed
	}
	r := rand.New(rand.NewPCG(1, 2))
	if n := run(10000, 0.17, r); n != 10000 {
		t.Errorf("17%% refused: %d of 10000 transactions guessed, want all", n)
	}
	if n := run(10000, 0.25, r); n < 9900 {
		t.Errorf("25%% refused: %d of 10000 transactions guessed, want nearly all", n)
	}
	// Every guess refused: eleven refusals pass a half, then pauses of
	// 16, 32, 64... transactions, each after four refusals more.
	g = guessGate{}
	paused.Store(0)
	if n := run(11, 1, r); n != 11 || paused.Load() != 0 {
		t.Fatalf("the first eleven refusals: %d guessed, %d paused", n, paused.Load())
	}
	if n := run(16, 1, r); n != 0 {
		t.Errorf("%d of the 16 transactions after the eleventh refusal guessed, want none", n)
	}
	if n := run(4+32, 1, r); n != 4 {
		t.Errorf("%d of the next 36 guessed, want 4, then a pause of 32", n)
	}
	if n := run(1000, 1, r); n > 24 { // four before each pause of 64, 128, 256, 512
		t.Errorf("%d of 1000 transactions guessed while every guess was refused, want at most 24", n)
	}
	// Guesses that commit again: the pauses end and stop doubling.
	g.skip = 0
	run(100, 0, r)
	if g.pauses != 0 {
		t.Errorf("%d pauses in a row after 100 guesses that committed", g.pauses)
	}
}

// The memo keeps the latest value observed of a key, never a large one,
// and stays within its bytes, forgetting a quarter when full.
func TestMemo(t *testing.T) {
	var m memo
	m.set("k", read{val: []byte("new"), modRev: 7}, 7)
	m.set("k", read{val: []byte("old"), modRev: 5}, 6) // observed earlier: ignored
	if r, ok := m.get("k"); !ok || string(r.val) != "new" || r.modRev != 7 {
		t.Errorf("k = %q at %d, %v; want the later observation", r.val, r.modRev, ok)
	}
	m.set("k", read{}, 9) // deleted
	if r, ok := m.get("k"); !ok || r.val != nil || r.modRev != 0 {
		t.Errorf("k = %q at %d, %v; want remembered absent", r.val, r.modRev, ok)
	}
	m.set("k", read{val: make([]byte, memoMaxValue+1), modRev: 10}, 10)
	if _, ok := m.get("k"); ok {
		t.Error("a value over memoMaxValue kept, or the stale one left in its place")
	}
	if m.bytes != 0 {
		t.Errorf("%d bytes counted in an empty memo", m.bytes)
	}
	m.set("k", read{val: make([]byte, memoMaxValue), modRev: 11}, 11)
	if r, ok := m.get("k"); !ok || len(r.val) != memoMaxValue {
		t.Error("a value of memoMaxValue bytes not kept")
	}
	m.set("k", read{}, 12)
	v := make([]byte, 1000)
	// Until it is full, the memo forgets nothing.
	room := (memoMaxBytes - m.bytes) / (1000 + len("room-0000"))
	for i := range room {
		m.set(fmt.Sprintf("room-%04d", i), read{val: v, modRev: int64(i + 1)}, int64(i+1))
	}
	if len(m.m) != room+1 {
		t.Errorf("%d keys kept of %d set within its room", len(m.m), room+1)
	}
	n := 2 * memoMaxBytes / 1000
	for i := range n {
		m.set(fmt.Sprint("key-", i), read{val: v, modRev: int64(i + 1)}, int64(i+1))
		if m.bytes > memoMaxBytes {
			t.Fatalf("%d bytes after %d sets, over %d", m.bytes, i+1, memoMaxBytes)
		}
	}
	if len(m.m) >= n/2 || len(m.m) < n/4 {
		t.Errorf("%d keys kept of %d set in twice its room", len(m.m), n)
	}
	if _, ok := m.get(fmt.Sprint("key-", n-1)); !ok {
		t.Error("the last key set is not kept")
	}
}
