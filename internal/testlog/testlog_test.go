package testlog_test

import (
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/oncekv/oncekv/internal/testlog"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Lines logged from many goroutines at once all arrive whole, every level
// included, while the test reads.
func TestLinesFromManyGoroutines(t *testing.T) {
	logger, logs := testlog.New()
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 50 {
				logger.Debug("line", "g", i, "n", j)
				_ = logs.String()
			}
		})
	}
	wg.Wait()
	lines := strings.Split(strings.TrimSuffix(logs.String(), "\n"), "\n")
	require.Len(t, lines, 400)
	for _, l := range lines {
		require.Regexp(t, `^time=\S+ level=DEBUG msg=line g=\d n=\d+$`, l)
	}
}
