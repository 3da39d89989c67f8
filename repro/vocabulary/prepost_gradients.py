"""The names repro/claims/prepost_gradients.py and repro/judges/prepost_gradients.py share: the claim's id and the
feed-forward weight matrices (Xiong et al. 2020, Fig 3(c)) whose gradient norms both select by name."""

CLAIM = "prepost_gradients"
FFN_MATRICES = ("ffn.fc1", "ffn.fc2")
