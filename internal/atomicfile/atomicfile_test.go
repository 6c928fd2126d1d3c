package atomicfile_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

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
	if runtime.GOOS != "windows" { // which has no such permissions
		require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	}

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

// RemoveStale removes the temporary files no writer holds, and nothing
// else: not a live writer's, not a file without the marker, not a
// directory or a symlink that looks like one.
func TestRemoveStaleTakesOnlyDeadWritersFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	touch := func(name string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte("x"), 0o600))
		return p
	}
	live, err := atomicfile.Temp(dir, "b.db")
	require.NoError(t, err)
	defer func() { _ = live.Close() }()
	// Its writer's lock went with it (Linux), it is open nowhere (Windows),
	// and it was last written two minutes ago (which Windows waits for).
	dead := touch(".a.db.oncekv-123.tmp")
	// Killed while setting its file up: taken once a minute old.
	setUp := touch(".g.db.oncekv-7.new")
	old := time.Now().Add(-2 * time.Minute)
	require.NoError(t, os.Chtimes(setUp, old, old))
	require.NoError(t, os.Chtimes(dead, old, old))
	require.NoError(t, os.Chtimes(live.Name(), old, old)) // open: alive whatever its age
	young := ".h.db.oncekv-8.new"
	touch(young)
	others := []string{".a.db.123.tmp", "a.db.oncekv-1.tmp", ".c.oncekv-2.txt", "a.db", ".notes.oncekv-draft.tmp", ".f.oncekv-.tmp", ".oncekv-5.tmp"}
	for _, n := range others {
		touch(n)
	}
	require.NoError(t, os.Mkdir(filepath.Join(dir, ".d.oncekv-3.tmp"), 0o700))
	kept := append(others, filepath.Base(live.Name()), ".d.oncekv-3.tmp", young)
	link := filepath.Join(dir, ".e.oncekv-4.tmp")
	if err := os.Symlink(filepath.Join(dir, "a.db"), link); err == nil {
		if _, err := os.Lstat(link); err == nil { // Wine answers nil and makes none
			kept = append(kept, ".e.oncekv-4.tmp")
		}
	}

	removed, err := atomicfile.RemoveStale(dir)
	require.NoError(t, err)
	if runtime.GOOS != "linux" && runtime.GOOS != "windows" {
		require.Empty(t, removed)
		return
	}
	require.ElementsMatch(t, []atomicfile.Removed{{Path: dead, Size: 1}, {Path: setUp, Size: 1}}, removed)
	require.ElementsMatch(t, kept, names(t, dir))
	require.True(t, strings.HasPrefix(filepath.Base(live.Name()), ".b.db.oncekv-"), live.Name())

	_, err = atomicfile.RemoveStale(filepath.Join(dir, "missing"))
	require.ErrorIs(t, err, os.ErrNotExist)
}

// A writer killed mid-copy leaves its temporary file; the next copy into
// the same directory removes it, while a live writer's, in another
// process, stays.
func TestTheNextCopyRemovesAKilledWritersFile(t *testing.T) {
	if dir := os.Getenv("ATOMICFILE_WRITE_FOREVER"); dir != "" {
		_, _ = atomicfile.Create(filepath.Join(dir, "killed.db"), func(f *os.File) (int64, error) {
			_, _ = f.WriteString("half a copy")
			time.Sleep(time.Hour) // until killed (a bare select{} is a deadlock Go ends, on Windows)
			return 0, nil
		})
		return
	}
	if runtime.GOOS != "linux" && runtime.GOOS != "windows" {
		t.Skip("nothing tells a dead writer's file from a live one's here")
	}
	t.Parallel()
	dir := t.TempDir()
	temps := func() []string {
		m, err := filepath.Glob(filepath.Join(dir, ".killed.db.oncekv-*.tmp"))
		require.NoError(t, err)
		return m
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestTheNextCopyRemovesAKilledWritersFile$")
	cmd.Env = append(os.Environ(), "ATOMICFILE_WRITE_FOREVER="+dir)
	require.NoError(t, cmd.Start())
	killed := false
	defer func() {
		if !killed {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	}()
	require.Eventually(t, func() bool {
		m := temps()
		if len(m) != 1 {
			return false
		}
		fi, err := os.Stat(m[0])
		return err == nil && fi.Size() > 0
	}, 30*time.Second, 5*time.Millisecond, "the writer's temporary file")

	// Old enough for Windows, which waits a minute: only being open keeps
	// it there.
	old := time.Now().Add(-2 * time.Minute)
	require.NoError(t, os.Chtimes(temps()[0], old, old))
	removed, err := atomicfile.RemoveStale(dir)
	require.NoError(t, err)
	require.Empty(t, removed, "the writer is alive")
	require.Len(t, temps(), 1)

	require.NoError(t, cmd.Process.Kill()) // SIGKILL; TerminateProcess on Windows
	_ = cmd.Wait()
	killed = true
	require.Len(t, temps(), 1, "a killed writer leaves its file")

	_, err = atomicfile.Create(filepath.Join(dir, "next.db"), func(f *os.File) (int64, error) {
		n, err := f.WriteString("whole")
		return int64(n), err
	})
	require.NoError(t, err)
	require.Empty(t, temps(), "the next copy removed it")
	require.Equal(t, []string{"next.db"}, names(t, dir))
}

// Copies written side by side into one directory, each removing the dead
// writers' files as it starts, never take one another's: every copy
// lands whole.
func TestCopiesSideBySide(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	const writers, each = 4, 100
	errs := make(chan error, writers*each)
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				name := fmt.Sprintf("copy-%d-%d", w, i)
				_, err := atomicfile.Create(filepath.Join(dir, name), func(f *os.File) (int64, error) {
					n, err := f.WriteString(name)
					return int64(n), err
				})
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Len(t, names(t, dir), writers*each, "every copy, and no temporary file")
}
