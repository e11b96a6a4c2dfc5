// Package dectris receives frames from a DECTRIS detector (ARINA, QUADRO, EIGER) while
// it acquires, through its SIMPLON interfaces, and replays and records such streams.
//
//   - Receiver (live.Receiver) reads the stream, v1 (multipart JSON and binary
//     messages, port 9999) or v2 (CBOR messages, port 31001), from the detector's
//     ZeroMQ PUSH socket with a PULL socket; in active mode it also configures, arms,
//     triggers and disarms the detector through the SIMPLON REST API (Client). Frames are
//     handed over as the stream sent them (bitshuffle-LZ4, LZ4 or uncompressed) and
//     decoded by Decode on the engine's workers, with the decoders of the HDF5 reader
//     (internal/h5filter); the pixels that the header's pixel mask flags read as 0,
//     as the offline DECTRIS reader (dataset/hdf5) reads them. DECTRIS gives no scan
//     shape: Header.Frames is the images the series asks for (see imagesAsked).
//   - Serve replays any dataset stemdot opens as a detector: REST API and stream.
//   - Recorder writes what was received to an NPY file that stemdot reopens.
//
// Sources (facts, not code): DECTRIS's SIMPLON API manual and public specifications
// (github.com/dectris/documentation: stream_v2/README.md, cbor/dectris-compression-
// tag.md), LiberTEM-live's DEigerClient and simulator, LiberTEM-rs's libertem_dectris
// (the v1 message fields, the images a trigger mode gives).
//
// ZeroMQ is github.com/go-zeromq/zmq4 (pure Go) for the PULL socket, read through a
// buffered TCP transport ("tcpbuf"), and internal/zmtp for the replay's PUSH socket.
// Measured against libzmq through cgo (github.com/pebbe/zmq4), receive only, DECTRIS v1
// messages over loopback, whole process (bench/zmqpick, A/B pairs): 192×192 uint16
// bitshuffle-LZ4 frames 0.64× libzmq's CPU, 96×96 0.73× (unbuffered, go-zeromq took
// 2.6× at 96×96).
package dectris
