// Command stemdot applies virtual detectors (mask stacks) to 4D-STEM datasets: the
// command line of package cmd/internal/cli, computed on this machine.
//
//	stemdot info FILE                       format, nav and sig shape, dtype, frames, size
//	stemdot plan [FILE] [--cpus] [--gpus]   the topology seen and the resource plan
//	stemdot apply FILE --mask ... --out R   virtual detector images as NPY (+ PNGs)
//	stemdot sum FILE --out S [--mean ...]   sum, mean, max and std frames in one pass
//	stemdot pick FILE --at Y,X --out F      the frames at scan positions
//	stemdot com SHIFTS.npy --icom F ...     CoM products: magnitude, divergence, curl, iCoM
//	stemdot descan fit FILE --out S.npy     the descan plane (CoM shift fit), per-position mask shifts
//	stemdot synth --out FILE ...            a synthetic 4D-STEM dataset
//	stemdot --version                       the version, and whether built with CUDA and HDF5
//
// Every command prints its errors as "stemdot: ..." on stderr, naming the flag that
// helps, and exits with status 1. An interrupt (Ctrl-C, SIGTERM, SIGHUP) ends every
// command with status 1 too, also one waiting in an open: apply and synth stop their
// work and write nothing, the other steps end at once.
package main

import (
	"os"

	"github.com/stemdot/stemdot/cmd/internal/cli"
)

func main() { os.Exit(cli.Main(os.Args[1:])) }
