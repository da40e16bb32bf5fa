// Package compose holds GRID's composition roots below the command line:
// the packages that put a controller and agents together. fleet runs a
// controller and N agents in one process (grid dev, and every test that
// needs a real fleet); bench drives a controller with many agents and
// measures it (grid bench).
//
// They are the only packages besides cli (and the binaries) that import
// both controller and agent; nothing under controller, agent, backends,
// api or internal imports them. TestLayers holds that.
//
// bench ships in the grid binary on purpose: "grid bench" is how an
// operator measures their own deployment (against --addr and --nats of a
// real controller), not only a developer tool.
package compose
