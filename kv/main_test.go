package kv_test

import (
	"bufio"
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/oncekv/oncekv/kv"
)

// TestMain doubles as a helper process: with ONCEKV_HOLD_LOCK set, the test
// binary opens that database, says "ready" and holds the file lock until its
// stdin closes. Otherwise it runs the tests and checks for goroutine leaks.
func TestMain(m *testing.M) {
	if path := os.Getenv("ONCEKV_HOLD_LOCK"); path != "" {
		db, err := kv.Open(path, nil)
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		fmt.Println("ready")
		_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
		_ = db.Close()
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}
