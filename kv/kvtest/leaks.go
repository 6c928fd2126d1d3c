package kvtest

import (
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// RunWithoutLeaks runs m's tests and exits with their code, or with 1
// when they passed but left goroutines running (goleak). Goroutines that
// end a while after what started them closed (an embedded etcd member's
// peer streams, a loopback server's keep-alive connections) are given up
// to drain to end; whatever still runs then is reported with its stack.
// opts are goleak's (goroutines to ignore). Call it from TestMain.
func RunWithoutLeaks(m *testing.M, drain time.Duration, opts ...goleak.Option) {
	code := m.Run()
	if code == 0 {
		err := goleak.Find(opts...)
		for deadline := time.Now().Add(drain); err != nil && time.Now().Before(deadline); err = goleak.Find(opts...) {
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
