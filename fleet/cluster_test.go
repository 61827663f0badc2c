package fleet_test

import (
	"github.com/orchestrd/orchestrd/fleet"
	"github.com/orchestrd/orchestrd/lanes"
)

// The fleet is the lanes' Cluster (checked here: fleet does not import
// lanes).
var _ lanes.Cluster = (*fleet.Fleet)(nil)
