// Package diskfull gives a test a disk that fills up: a tmpfs of a chosen
// size mounted over a fresh temporary directory, and a filler file that
// takes every byte left on it until the test frees it. Writes to the disk
// then fail with ENOSPC, as on a production volume that filled up, so a
// test can check what a real disk-full does to the code above bbolt: what
// the callers are told, that nothing half-written becomes visible, and that
// writes resume without a restart once space returns.
//
// Mounting needs Linux and CAP_SYS_ADMIN (root, as in CI); elsewhere, and
// where the mount is refused (an unprivileged user, a container without
// the capability), Mount skips the test and says why.
package diskfull
