package outbox_test

import (
	"context"
	"os"
	"testing"
	"time"

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

var ctx = context.Background()

var t0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
