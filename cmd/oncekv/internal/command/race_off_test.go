//go:build !race

package command

// raceDetector is true in a build with -race.
const raceDetector = false
