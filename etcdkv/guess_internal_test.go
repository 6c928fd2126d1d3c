package etcdkv

import (
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
