"""Stage 6: training the GPT: config, data, the loop and its resumable state, evaluation, the positions
experiment, and the pictures of a run.

The folder is ``training/``, not ``train/``: importing a subpackage binds its name on ``tokembed``, and
``tokembed.train`` is the public function.
"""
