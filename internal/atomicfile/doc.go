// Package atomicfile creates a file that holds the whole of what was
// written into it or does not exist: written into a temporary file beside
// it, synced, then linked at its name. The backups (kv.DB.BackupFile, the
// CLI's backup, restore and compact) write their copies with it.
//
// A process killed while it writes leaves its temporary file behind, as
// large as the copy had grown. Each temporary file is named
// ".NAME.oncekv-RANDOM.tmp" and locked by its writer (an open file
// description lock, which bbolt's flock on the same file leaves alone)
// from before it has that name to the end, on Linux, so the next write in
// the same directory tells a dead writer's file from a live one's and
// removes it (RemoveStale). On Windows a live writer's file is the one
// open somewhere: the next write removes those nobody has open once they
// are a minute old. On macOS and the BSDs none is removed.
package atomicfile
