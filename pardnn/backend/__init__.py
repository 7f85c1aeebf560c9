"""Backends: run a placed graph on real devices and compare with the machine model's prediction.

* `pardnn.backend.onnx_pipeline` (the ``onnx`` extra): split an ONNX model
  into one sub-model per stage of a placement and run the stages as a
  pipeline of onnxruntime sessions, one per device.

Framework imports stay inside the submodules, so ``import pardnn`` (and
``import pardnn.backend``) never imports onnx or TensorFlow.
"""
