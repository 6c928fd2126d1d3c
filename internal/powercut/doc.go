//go:build linux

// Command powercut mounts a filesystem whose power can be cut: the crash
// suite's power-loss test (internal/crashtest, TestPowerLoss) runs its
// workload on it.
//
// Files live in memory, twice: as processes see them, and as the disk
// holds them. A file's data reaches the disk when the file is synced
// (fsync or fdatasync), a directory's names when the directory is synced;
// nothing else makes anything durable. The model is strict, as POSIX
// allows and a disk with a volatile cache behaves: a file created, synced
// and never named durably (its directory not synced) is lost with the
// power, and so is a rename.
//
// It is driven on its standard input, a command a line:
//
//	cut SEED DIR   the power goes: from now on every call fails with EIO.
//	               What the disk held is written under DIR (a directory on
//	               a real disk), with some of the writes not yet synced:
//	               each 512-byte sector written since its file's last sync
//	               is kept with a probability drawn from SEED (0, one half
//	               or 1: none, some in any order, all). It answers
//	               "cut: ..." when DIR is complete.
//	cutat N SEED DIR
//	               the same cut, made by the N-th sync from now (a file's
//	               or a directory's), which takes 20 ms (other calls go
//	               on meanwhile) and then fails: the moment a commit's
//	               pages are written and not synced, or its meta page. It
//	               answers "cut: ... at a sync" then. A cut asked for once
//	               the power is cut answers "cut: already".
//	failat N       the N-th sync from now fails with EIO and makes nothing
//	               durable, and the power stays on: a disk that failed a
//	               write-back (a commit's meta page written and not
//	               synced, if that sync is the meta page's). It answers
//	               "armed" at once, and "failed: a sync" then. Later syncs
//	               succeed.
//	exit           unmount and exit (so does the end of the input).
//
//	powercut -mount DIR [-from DIR]
//
// -from loads a directory's files as the filesystem's first content,
// durable. It prints "ready" once mounted. It needs /dev/fuse and root
// (it mounts by itself, without fusermount).
//
// It is a module of its own: the library's modules import nothing but
// bbolt, uuid and compress, and this one needs go-fuse. The crash suite
// runs it as a program (ONCEKV_POWERCUT names it; .ci/run builds it).
package main
