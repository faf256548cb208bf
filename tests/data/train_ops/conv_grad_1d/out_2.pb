Bout_2J ШЄs]вєй?Ц^yїЫљ@•$to•IхњrутYAy
@