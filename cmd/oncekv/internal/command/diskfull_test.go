package command

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/internal/diskfull"
)

// backup and restore onto a disk without room for the copy: exit 1 naming
// the cause, and nothing changed: no file at --out, the file restore was
// to replace as it was, no temporary file or kept-aside name left.
func TestCopiesOntoAFullDisk(t *testing.T) {
	t.Parallel()
	db := fixture(t)
	content, err := os.ReadFile(db)
	require.NoError(t, err)
	dir := diskfull.Mount(t, int64(len(content))+int64(len(content))/2) // the file, and half a copy

	target := filepath.Join(dir, "payments.db")
	require.NoError(t, os.WriteFile(target, content, 0o600))

	_, stderr, code := run("backup", "--db", db, "--out", filepath.Join(dir, "backup.db"))
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "no space left on device")
	requireNames(t, dir, "payments.db")

	backup := filepath.Join(t.TempDir(), "backup.db")
	_, stderr, code = run("backup", "--db", db, "--out", backup)
	require.Equal(t, 0, code, stderr)
	_, stderr, code = run("restore", "--db", target, "--from", backup)
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "no space left on device")
	require.Contains(t, stderr, "untouched")
	after, err := os.ReadFile(target)
	require.NoError(t, err)
	require.True(t, bytes.Equal(content, after), "the file restore was to replace is as it was")
	requireNames(t, dir, "payments.db")
}

// requireNames fails t unless dir holds exactly the names given.
func requireNames(t *testing.T, dir string, names ...string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	got := []string{}
	for _, e := range entries {
		got = append(got, e.Name())
	}
	require.ElementsMatch(t, names, got)
}
