package idemhttp

import (
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/internal/testlog"
	"github.com/oncekv/oncekv/kv"
)

// A write kv refused during the pause after a commit failed for lack of
// space is answered as the failed commit's was (503, nothing stored), with
// a Retry-After that reaches the pause's end (1 to 5 s), and logged at
// debug level: the failed commit was logged as an error, once, and a
// pause refuses every write while it lasts.
func TestAWriteRefusedDuringTheNoSpacePause(t *testing.T) {
	t.Parallel()
	commit := &os.PathError{Op: "write", Path: "orders.db", Err: syscall.ENOSPC}
	for _, tc := range []struct {
		name  string
		pause time.Duration // 0: the failed commit's own error
		retry string
		level string
	}{
		{"the failed commit", 0, "1", "ERROR"},
		{"a pause of 3.5 s", 3500 * time.Millisecond, "4", "DEBUG"},
		{"a pause nearly over", 200 * time.Millisecond, "1", "DEBUG"},
		{"a long pause", time.Hour, "5", "DEBUG"},
	} {
		logger, logs := testlog.New()
		m := &Middleware{log: logger}
		var err error = commit
		if tc.pause > 0 {
			err = &kv.NoSpaceError{Until: time.Now().Add(tc.pause), Err: commit}
		}
		rec := httptest.NewRecorder()
		m.ledgerAnswer(err, time.Now()).write(rec)
		require.Equal(t, http.StatusServiceUnavailable, rec.Code, tc.name)
		require.Equal(t, tc.retry, rec.Header().Get("Retry-After"), tc.name)
		require.Contains(t, rec.Body.String(), "disk is full", tc.name)
		require.Equal(t, 1, strings.Count(logs.String(), "level="+tc.level+` msg="idempotent request not stored: the database's disk is full`), "%s: %s", tc.name, logs)
	}
}
