// Package testwait bounds a test's waits on what the code under test is to
// do: a relay's pass, a provider entered, a handler's answer. A wait on a
// bare channel receive lasts as long as the test binary's -timeout when
// the code never sends (a defect the test exists to find), and then fails
// with every goroutine's stack and no word of what was awaited. Receive
// fails the test instead, after Bound, saying what it waited for.
//
// Waits on the test's own goroutines (a start signal, a release) need no
// bound: they end when the test does.
package testwait
