package atomicfile_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/oncekv/oncekv/internal/atomicfile"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// names lists dir.
func names(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

// Create puts what write wrote at path, mode 0600; a failed write leaves
// nothing; an existing path is refused before write runs, and one that
// appears while it runs is not replaced.
func TestCreateWritesAWholeFileOrNothing(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "a")
	write := func(data string) func(f *os.File) (int64, error) {
		return func(f *os.File) (int64, error) {
			n, err := f.WriteString(data)
			return int64(n), err
		}
	}
	n, err := atomicfile.Create(path, write("hello"))
	require.NoError(t, err)
	require.EqualValues(t, 5, n)
	got, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, "hello", string(got))
	fi, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())

	ran := false
	_, err = atomicfile.Create(path, func(*os.File) (int64, error) { ran = true; return 0, nil })
	require.ErrorIs(t, err, os.ErrExist)
	require.False(t, ran, "refused before writing")

	failed := errors.New("disk on fire")
	_, err = atomicfile.Create(filepath.Join(dir, "b"), func(f *os.File) (int64, error) {
		_, _ = f.WriteString("half")
		return 4, failed
	})
	require.ErrorIs(t, err, failed)

	late := filepath.Join(dir, "c")
	_, err = atomicfile.Create(late, func(f *os.File) (int64, error) {
		require.NoError(t, os.WriteFile(late, []byte("theirs"), 0o600)) // appears meanwhile
		return write("mine")(f)
	})
	require.ErrorIs(t, err, os.ErrExist)
	got, err = os.ReadFile(late)
	require.NoError(t, err)
	require.Equal(t, "theirs", string(got), "never replaced")

	require.ElementsMatch(t, []string{"a", "c"}, names(t, dir), "no temporary file left")

	_, err = atomicfile.Create(filepath.Join(dir, "missing", "d"), write("x"))
	require.ErrorIs(t, err, os.ErrNotExist)
}

// Paced passes every byte on, across its syncs.
func TestPacedWritesEverything(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "paced")
	chunk := make([]byte, 1<<20+7) // not a divisor of PaceBytes
	var want []byte
	n, err := atomicfile.Create(path, func(f *os.File) (int64, error) {
		w := atomicfile.Paced(f)
		var n int64
		for i := range 3 * atomicfile.PaceBytes / len(chunk) {
			for j := range chunk {
				chunk[j] = byte(i + j)
			}
			want = append(want, chunk...)
			m, err := w.Write(chunk)
			n += int64(m)
			if err != nil {
				return n, err
			}
		}
		return n, nil
	})
	require.NoError(t, err)
	got, err := os.ReadFile(path)
	require.NoError(t, err)
	require.EqualValues(t, len(want), n)
	require.True(t, bytes.Equal(want, got))
}

// Replace puts the new file in the old one's place, or leaves the old one
// when the write fails; either way no temporary file is left.
func TestReplaceSwapsWholeFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "a")
	require.NoError(t, os.WriteFile(path, []byte("old"), 0o600))
	_, err := atomicfile.Replace(path, func(f *os.File) (int64, error) {
		n, err := f.WriteString("half")
		return int64(n), errors.Join(err, errors.New("cut short"))
	})
	require.ErrorContains(t, err, "cut short")
	got, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, "old", string(got))

	n, err := atomicfile.Replace(path, func(f *os.File) (int64, error) {
		n, err := f.WriteString("new")
		return int64(n), err
	})
	require.NoError(t, err)
	require.EqualValues(t, 3, n)
	got, err = os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, "new", string(got))
	require.Equal(t, []string{"a"}, names(t, dir))
}
