package executors

import "time"

// SetFirstUsageSample sets when a task's first usage sample is taken, for
// the tests of this directory, and returns the restore.
func SetFirstUsageSample(d time.Duration) (restore func()) {
	old := firstUsageSample
	firstUsageSample = d
	return func() { firstUsageSample = old }
}
