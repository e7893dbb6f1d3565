"""A CUDA graph captured as the engines capture theirs: one call first on a side stream, then the capture."""

import torch


def captured(forward):
    """``(graph, result)``: ``forward()`` run once on a side stream (lazy initialisation and JIT builds stay out
    of the graph), then captured; ``result`` is what the captured call returned, in the graph's memory."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        forward()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        result = forward()
    return graph, result
