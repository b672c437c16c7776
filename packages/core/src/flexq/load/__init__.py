"""Loading into Paddle tensors: the API, the engines, target description, AOA mapping,
sources of component boxes and writes into targets."""
