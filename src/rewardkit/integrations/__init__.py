"""Adapters between rewardkit and RL trainers.

* :mod:`rewardkit.integrations.trl`: reward functions for TRL's ``GRPOTrainer(reward_funcs=...)``.
* :mod:`rewardkit.integrations.verl`: verl's ``custom_reward_function`` entry (``compute_score``)
  and a reward manager (:class:`~rewardkit.integrations.verl.RewardKitRewardManager`).
* OpenRLHF talks to ``rewardkit serve`` (:mod:`rewardkit.server`) over HTTP.

Importing this package imports neither the trainers nor torch; each adapter imports what it
needs when it is called.
"""
