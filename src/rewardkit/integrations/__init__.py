"""Adapters between rewardkit and RL trainers.

* :mod:`rewardkit.integrations.trl`: reward functions for TRL's ``GRPOTrainer(reward_funcs=...)``.
* :mod:`rewardkit.integrations.verl`: verl's ``custom_reward_function`` entry (``compute_score``)
  and a reward manager (:class:`~rewardkit.integrations.verl.RewardKitRewardManager`).
* :mod:`rewardkit.integrations.verl_plugin`: registers the manager as ``rewardkit`` in verl's
  registry (loaded by ``import verl`` through the ``verl.plugins`` entry point).
* OpenRLHF talks to ``rewardkit serve`` (:mod:`rewardkit.server`) over HTTP; the reply's shape is
  :mod:`rewardkit.integrations.openrlhf`.
* :mod:`rewardkit.integrations.sample_info`: the one key set every sample reports to a trainer.

Importing this package imports neither the trainers nor torch; each adapter imports what it
needs when it is called.
"""
