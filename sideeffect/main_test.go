package sideeffect_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain doubles as the producer of the crash test: with PRODUCER_DB set,
// the binary commits events and kills itself (see outbox_test.go).
func TestMain(m *testing.M) {
	if path := os.Getenv("PRODUCER_DB"); path != "" {
		producerChild(path)
		return
	}
	goleak.VerifyTestMain(m)
}
