// Package embedded runs a real etcd cluster on loopback ports for demos,
// examples and tests: members embedded in this process (server/v3/embed),
// or members in processes of their own that can be killed with SIGKILL.
//
// It is not a way to run etcd in production: members listen on plain
// HTTP on 127.0.0.1, and fsync is off unless Options.Fsync asks for it.
// Production runs an etcd cluster of its own and passes its endpoints to
// etcdkv.Open.
//
// # The model
//
// Start chooses free ports, starts Options.Members members on data
// directories under Options.Dir and waits until each serves; Endpoints is
// what etcdkv.Open and the CLI's --etcd take. A member is a real etcd
// server, Raft included: the faults a test drives are the cluster's own.
// StopMember stops one at once (an embedded member is closed, a process
// member is killed with SIGKILL), RestartMember starts it again on its
// data directory to rejoin and catch up, MoveLeader hands the leadership
// over, and Identical checks that the running members hold the same data
// (etcd's HashKV at one revision), which is how a test shows that no
// member diverged after the faults.
//
// A program that asks for process members (Options.Process) is
// re-executed as each of them: it must call RunMemberIfAsked first thing
// in main (or TestMain).
package embedded
